{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, TypeFamilies, NoStarIsType,
             RankNTypes, PolyKinds, AllowAmbiguousTypes #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
A balanced tree over a beat's @n@ values with a register after every level:
a sum too wide for one cycle (attention's dot products and its rows of
products), the argmax of a beat ("K2C.Classify").

= Arithmetic

@treeFold f z@ of values @x_0 .. x_(n-1)@ pairs neighbours level by level
(@x_0@ with @x_1@, @x_2@ with @x_3@, ..., then their results), the tree padded
on the right with @z@ up to a power of two: @f@ associative with @z@ its unit
gives the fold of the values in order.

= Hardware and timing

@ceil(log2 n)@ levels ('TreeDepth'), each level's results in registers
without a reset; the beat's payload and valid bit in a register beside each
level. A beat is valid at the output exactly 'TreeDepth' cycles after it is
at the input; one beat a cycle.
-}
module K2C.Tree
  ( treeFold
  , TreeDepth
  ) where

import Clash.Prelude
import Data.Kind (Type)
import Data.Proxy (Proxy (..))
import Data.Singletons (Apply, TyFun)

-- | Register levels of 'treeFold' over @n@ values.
type TreeDepth n = CLog 2 n

-- | Every level of the tree carries the beat (valid and payload) and its results.
data Level (a :: Type) (f :: TyFun Nat Type) :: Type
type instance Apply (Level a) k = a

-- | Each beat's payload with the fold of its values, 'TreeDepth' cycles later
-- (@Nothing@: no beat).
treeFold
  :: forall dom n a t
   . (HiddenClockResetEnable dom, KnownNat n, 1 <= n, NFDataX a, NFDataX t)
  => (a -> a -> a)
  -> a
  -> Signal dom (Maybe (t, Vec n a))
  -> Signal dom (Maybe (t, a))
treeFold combine unit input = (\held total -> fmap (\t -> (t, total)) held) <$> beat <*> result
  where
    (beat, result) = dtfold (Proxy @(Level (Signal dom (Maybe t), Signal dom a)))
                            id level (map (\i -> (fmap fst <$> input, leaf i . fmap snd <$> input)) indicesI)

    -- A leaf's value does not depend on whether the beat is valid (an empty beat's result is
    -- never read): gating every value with the valid bit would give that one flip-flop a pin
    -- per value bit, and its copy's route to a leaf would be a critical path (mlp_tanh on
    -- ECP5: a fan-out copy -> 6.0 ns of route -> the softmax's first comparison, 12.6 ns).
    leaf :: Index (2 ^ TreeDepth n) -> Maybe (Vec n a) -> a
    leaf i held
      | toInteger i < natToNum @n = fromJustX held !! i
      | otherwise                 = unit

    level
      :: SNat j
      -> (Signal dom (Maybe t), Signal dom a)
      -> (Signal dom (Maybe t), Signal dom a)
      -> (Signal dom (Maybe t), Signal dom a)
    level _ (beatA, a) (_, b) = (register Nothing beatA, delay unit (combine <$> a <*> b))
