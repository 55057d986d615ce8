{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, TypeFamilies,
             DeriveGeneric, DeriveAnyClass, NoStarIsType, TupleSections, RankNTypes, ConstraintKinds,
             AllowAmbiguousTypes #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver -fconstraint-solver-iterations=8 #-}
{-|
Max and average pooling: the window generator ("K2C.Window") followed by a
per-channel reduction of each window, pipelined in 'PoolDepth' register stages
("K2C.Pipe"): the window registered, a balanced tree along the rows, then one
down the rows (and, for the average, the rounded division), a register after
every level.

= Arithmetic (docs/guide/contract.md, "Convolution and pooling")

* Max: per channel maximum of the @N = ph * pw@ window values (exact; a
  balanced tree of comparators).
* Average: per channel, on raw integers, @floor ((2 * sum + N) / (2 * N))@: round
  to nearest, ties toward +infinity, exact. @N = ph * pw@ ('avgPool'), or with
  Keras 'same' padding ('avgPoolSame') the window's count of non-padding values,
  @N = rows * cols@, which depends on the output position only. The sum is taken in
  @Signed (i + f + CLog 2 ph + CLog 2 pw + 2)@, wide enough for @2 * sum + N@ (no overflow,
  no saturation). When @2 * N@ is a power of two the division is an arithmetic
  shift right; otherwise a division by a constant is built. The result is an
  average of in-range values, so it is in range: no saturation needed.

'Same' padding is not built in: put "K2C.Pad" in front ('minBound' for max,
zeros for average). 'avgPoolSame' then divides each window by its count of
non-padding values, as Keras does: it keeps the output position (row and
column counters, advanced when a window's sums leave the adder trees),
computes the window's counts of real rows @a@ and columns @b@ from them, and
divides in two steps by constants chosen at run time: @t = floor (2 S / a)@
among @ph@ constant dividers, then @floor ((t + b) / (2 b))@ among @pw@ (per
channel), which equals @floor ((2 S + a b) / (2 a b))@ exactly.

= Timing, storage, protocol

'maxPool' and 'avgPool': those of 'K2C.Window.window' with @(kh, kw) = (ph, pw)@,
then a "K2C.Pipe" stage of @d = PoolDepth ph pw@ registers (its queue of @d + 2@
results), one comparison per stage: a window's whole reduction as one
combinational path into the next block takes 26.6 ns (cnn_variants on ECP5: a
3x3 maximum, four comparisons in a row, into a Flatten's buffer, 69 logic
levels), two comparisons per stage 14.0 ns. The first stage only registers the
window: the window generator offers a window in its last pixel's cycle, from
the pixel's source, without a register of its own, so a comparison there would
follow a FIFO's LUT-RAM read (the thesis CNN on ECP5: the read -> the first
comparison -> a register, 12.45 ns).
'avgPoolSame': the same with @d = AvgSameDepth ph pw = PoolDepth ph pw + 2@, the
sums' stages then a register after each of the two divisions, and the two
position counters (@Index h2@, @Index w2@): combinational sums and divisions
would be one path from the window into the next block.

(@-fconstraint-solver-iterations=8@ above: GHC's default of 4 runs out while
the typelits plugins solve the 'KnownNat' of the wide sum type.)
-}
module K2C.Pool
  ( PoolDepth
  , AvgSameDepth
  , maxPool
  , avgPool
  , avgPoolSame
  , roundedQuotient
  ) where

import Clash.Prelude hiding (window)
import Data.Maybe (isJust)
import Data.Proxy (Proxy (..))

import K2C.Filter (Level)
import K2C.Pipe (pipeS, stageReg)
import K2C.Stream (Stream, (|>))
import K2C.Window (nextPosition, window)

-- | Register stages of one axis' reduction: a register after every level of its
-- balanced tree of comparators (adders), and one register when there is no level.
type AxisDepth n = Max 1 (CLog 2 n)

-- | Register stages of a pooling reduction of @ph x pw@ windows: the window
-- itself, then the trees along the rows and down the rows (3 for windows of at
-- most two by two).
type PoolDepth ph pw = 1 + AxisDepth pw + AxisDepth ph

-- | The constraints every pooling layer needs.
type PoolSize dom h w ph pw sh sw c i f =
  ( HiddenClockResetEnable dom
  , KnownNat h, KnownNat w, KnownNat ph, KnownNat pw
  , KnownNat sh, KnownNat sw, KnownNat c, KnownNat i, KnownNat f
  , 1 <= ph, 1 <= pw, 1 <= sh, 1 <= sw, ph <= h, pw <= w )

-- | Max pooling, @ph x pw@ windows with strides @(sh, sw)@, 'valid' padding.
maxPool
  :: forall dom h w ph pw sh sw c i f
   . PoolSize dom h w ph pw sh sw c i f
  => SNat h -> SNat w -> SNat ph -> SNat pw -> SNat sh -> SNat sw
  -> Stream dom (Vec c (SFixed i f)) (Vec c (SFixed i f))
maxPool h w ph pw sh sw = window h w ph pw sh sw |> pooled id minBound max id id

-- | Average pooling, @ph x pw@ windows with strides @(sh, sw)@, 'valid' padding.
avgPool
  :: forall dom h w ph pw sh sw c i f
   . PoolSize dom h w ph pw sh sw c i f
  => SNat h -> SNat w -> SNat ph -> SNat pw -> SNat sh -> SNat sw
  -> Stream dom (Vec c (SFixed i f)) (Vec c (SFixed i f))
avgPool h w ph pw sh sw = window h w ph pw sh sw |> pooled toWide' 0 (+) average fromWide'
  where
    toWide'   = toWide @i @f @ph @pw
    fromWide' = fromWide @i @f @ph @pw
    average   = roundedQuotient (SNat @(ph * pw))

-- | A window's reduction in 'PoolDepth' register stages on "K2C.Pipe": each value
-- taken to the reduction's type (@leaf@), a balanced tree of @op@ along the rows
-- (all rows side by side), then one down the rows, a register after every level.
-- @final@ (the average's division) comes before the last register and @out@ (a
-- resize: wires) after it. @unit@ pads a tree to a power of two (a maximum's
-- 'minBound', a sum's 0). A 3x3 maximum with two comparisons per register stage
-- would be cnn_variants' critical path at 120 multipliers (ECP5: 14.0 ns, 22 levels).
pooled
  :: forall dom ph pw c a r b
   . ( HiddenClockResetEnable dom, KnownNat ph, KnownNat pw, KnownNat c, 1 <= ph, 1 <= pw
     , NFDataX a, NFDataX r, NFDataX b )
  => (a -> r) -> r -> (r -> r -> r) -> (r -> r) -> (r -> b)
  -> Stream dom (Vec ph (Vec pw (Vec c a))) (Vec c b)
pooled leaf unit op final out = pipeS (SNat @(PoolDepth ph pw)) (fmap (fmap (map out)) . reduction leaf unit op final)

-- | The pipeline of 'pooled', 'PoolDepth' registers: the window registered, then
-- the trees along and down the rows. The first register because the window
-- generator offers a window in its last pixel's cycle, straight from the
-- pixel's source (a FIFO's LUT-RAM read: the thesis CNN on ECP5 at 80.3 MHz,
-- that read -> a 16-bit comparison -> the tree's first register, 12.45 ns).
reduction
  :: forall dom ph pw c a r
   . ( HiddenClockResetEnable dom, KnownNat ph, KnownNat pw, KnownNat c, 1 <= ph, 1 <= pw
     , NFDataX a, NFDataX r )
  => (a -> r) -> r -> (r -> r -> r) -> (r -> r)
  -> Signal dom (Maybe (Vec ph (Vec pw (Vec c a)))) -> Signal dom (Maybe (Vec c r))
reduction leaf unit op final = downRows . alongRows . stageReg
  where
    -- the window's pw columns, each the ph rows' values of that column
    alongRows = treeStages @(CLog 2 pw) (repeat (repeat unit)) (zipWith (zipWith op)) id
              . fmap (fmap (transpose . map (map (map leaf))))
    downRows  = treeStages @(CLog 2 ph) (repeat unit) (zipWith op) (map final)

-- | A balanced tree of @op@ over the @n@ values of a beat, padded with @unit@ to
-- @2^lv@ leaves (@lv = CLog 2 n@), a register after every level, and one
-- register when there is no level (@n = 1@); @final@ is applied before the last
-- register. Valid bits reset, data not.
treeStages
  :: forall lv dom n a
   . (HiddenClockResetEnable dom, KnownNat lv, KnownNat n, NFDataX a)
  => a -> (a -> a -> a) -> (a -> a)
  -> Signal dom (Maybe (Vec n a)) -> Signal dom (Maybe a)
treeStages unit op final input = (\v x -> if v then Just x else Nothing) <$> validOut <*> valueOut
  where
    levels = natToNum @lv :: Int
    valid  = isJust <$> input
    leaves :: Vec (2 ^ lv) (Signal dom a)
    leaves = unbundle (padTo . fromJustX <$> input)
    padTo :: Vec n a -> Vec (2 ^ lv) a
    padTo xs = takeI (xs ++ repeat @(2 ^ lv) unit)
    (validOut, valueOut)
      | levels == 0 = (register False valid, stage (final <$> leaves !! (0 :: Int)))
      | otherwise   = dtfold (Proxy @(Level (Signal dom Bool, Signal dom a))) (valid,) level leaves
    level :: SNat j -> (Signal dom Bool, Signal dom a) -> (Signal dom Bool, Signal dom a)
          -> (Signal dom Bool, Signal dom a)
    level j (v, x) (_, y) = (register False v, stage (lastOnly <$> (op <$> x <*> y)))
      where lastOnly = if snatToNum j + 1 == levels then final else id
    stage = delay (deepErrorX "pool: empty stage")

-- | Average pooling with Keras 'same' padding on the /padded/ @hp x wp@ image
-- (put @"K2C.Pad".pad ... 0@ in front), @h2 x w2@ windows: each window is
-- divided by its count of non-padding values (module header).
avgPoolSame
  :: forall dom hp wp ph pw sh sw top bottom left right h2 w2 c i f
   . ( PoolSize dom hp wp ph pw sh sw c i f
     , KnownNat top, KnownNat bottom, KnownNat left, KnownNat right
     , KnownNat h2, KnownNat w2, 1 <= h2, 1 <= w2 )
  => SNat hp -> SNat wp -> SNat ph -> SNat pw -> SNat sh -> SNat sw
  -> SNat top -> SNat bottom -> SNat left -> SNat right -> SNat h2 -> SNat w2
  -> Stream dom (Vec c (SFixed i f)) (Vec c (SFixed i f))
avgPoolSame hp wp ph pw sh sw top bottom left right SNat SNat =
  window hp wp ph pw sh sw
  |> pipeS (SNat @(AvgSameDepth ph pw)) (divideByPosition rows cols . reduction toWide' 0 (+) id)
  where
    toWide' = toWide @i @f @ph @pw
    rows = axisCount hp ph sh top bottom :: Index h2 -> Index ph
    cols = axisCount wp pw sw left right :: Index w2 -> Index pw

-- | The count of non-padding values, minus one, of window @k@ along one axis
-- of padded length @n@ (window @kn@, stride @s@, padding @before@ and
-- @after@): @min (k*s + kn) (n - after) - max (k*s) before - 1@, on a counter
-- and constants (no division).
axisCount
  :: forall n kn s before after m
   . (KnownNat n, KnownNat kn, KnownNat s, KnownNat before, KnownNat after, KnownNat m, 1 <= kn)
  => SNat n -> SNat kn -> SNat s -> SNat before -> SNat after -> Index m -> Index kn
axisCount n kn s before after k = fromIntegral (min (start + snatToNum kn) end - max start first - 1)
  where
    start, first, end :: Unsigned 32
    start = fromIntegral k * snatToNum s
    first = snatToNum before
    end   = snatToNum n - snatToNum after

-- | Register stages of 'avgPoolSame': those of the sums ('PoolDepth'), then
-- one per division.
type AvgSameDepth ph pw = PoolDepth ph pw + 2

-- | The divisions of 'avgPoolSame', a register after each: per channel window
-- sum @S@, @t = floor (2 S / a)@, then @floor ((t + b) / (2 b))@, for the
-- window's @a@ rows and @b@ columns of non-padding values (equal to
-- @floor ((2 S + a b) / (2 a b))@, since @floor (floor y / c) = floor (y / c)@
-- for an integer @c > 0@): constant divisions chosen at run time. The window's
-- position is a counter of the sums coming out of the tree, in raster order.
-- (Without these registers the sums and both divisions would be one
-- combinational path from the window into the next block.)
divideByPosition
  :: forall dom h2 w2 ph pw c i f
   . ( HiddenClockResetEnable dom, KnownNat h2, KnownNat w2, KnownNat ph, KnownNat pw
     , KnownNat c, KnownNat i, KnownNat f, 1 <= ph, 1 <= pw, 1 <= h2, 1 <= w2 )
  => (Index h2 -> Index ph) -> (Index w2 -> Index pw)
  -> Signal dom (Maybe (Vec c (WideSum i f ph pw))) -> Signal dom (Maybe (Vec c (SFixed i f)))
divideByPosition rows cols sums = fmap (map (fromWide @i @f @ph @pw)) <$> byColumns
  where
    position :: Signal dom (Index h2, Index w2)
    position  = register (0, 0) (mux (isJust <$> sums) (nextPosition <$> position) position)
    byRows    = stageReg ((\(r, _) -> fmap (map (divideBy (rows r)))) <$> position <*> sums)
    -- the column count of the beat in 'byRows'
    columns   = delay 0 (cols . snd <$> position)
    byColumns = stageReg ((\b -> fmap (map (roundBy b))) <$> columns <*> byRows)
    divideBy a total = smap (\l _ -> (2 * total) `div` (snatToNum l + 1)) (repeat @ph ()) !! a
    roundBy b t      = smap (\l _ -> (t + snatToNum l + 1) `div` (2 * (snatToNum l + 1))) (repeat @pw ()) !! b

-- | Wide enough for @2 * sum + N@ of @N = ph * pw@ values of @SFixed i f@.
type WideSum i f ph pw = Signed (i + f + CLog 2 ph + CLog 2 pw + 2)

-- | A value in the wide sum's type.
toWide :: forall i f ph pw . (KnownNat i, KnownNat f, KnownNat ph, KnownNat pw, 1 <= ph, 1 <= pw) => SFixed i f -> WideSum i f ph pw
toWide = resize . unSF

-- | A rounded average (in range by construction) back in the input's format.
fromWide :: forall i f ph pw . (KnownNat i, KnownNat f, KnownNat ph, KnownNat pw, 1 <= ph, 1 <= pw) => WideSum i f ph pw -> SFixed i f
fromWide = sf (SNat @f) . resize @Signed @(i + f + CLog 2 ph + CLog 2 pw + 2) @(i + f)

-- | @floor ((2 * s + n) / (2 * n))@; a shift when @2 * n@ is a power of two.
roundedQuotient :: forall n m . KnownNat m => SNat n -> Signed m -> Signed m
roundedQuotient n s
  | popCount divisor == 1 = shiftR numerator (countTrailingZeros divisor)
  | otherwise             = numerator `div` fromIntegral divisor
  where
    count     = snatToNum n :: Int
    divisor   = 2 * count
    numerator = 2 * s + fromIntegral count
