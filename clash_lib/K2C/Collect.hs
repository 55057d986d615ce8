{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, TypeFamilies,
             DeriveGeneric, DeriveAnyClass, NoStarIsType #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
Stream flatten: gathers @n@ beats of @Vec c a@ into one beat of
@Vec (n * c) a@, beat 0's elements first. With @n = H * W@ beats of an
@(H, W, C)@ image this is Keras' @Flatten@ (row-major, channels last).

= Why it looks like this

One shift register of @n@ beats is both the gathering buffer and the output
register: each accepted beat shifts in at the end, so after @n@ beats beat 0
sits at the front. No address decoding, no second buffer.
Storage: @n * c * BitSize a@ bits of data, an @Index n@ counter and a flag.

= Protocol and exact timing

Input ready is @not full@ (registered; independent of the input's valid and
of downstream's ready).

* The vector is valid the cycle after its @n@-th beat is accepted, and stays
  valid until it moves.
* Input ready is low while the vector is held, and high again the cycle after
  it moves: with downstream ready, the last beat accepted in cycle @t@ gives
  the vector in cycle @t + 1@ and the next image's first beat can be accepted
  in cycle @t + 2@. So with no input gaps and downstream always ready an image
  takes @n + 1@ cycles (@n / (n + 1)@ beats per cycle).

'collectSum' keeps the sum of the @n@ beats instead of the beats (one register
of @c@ values and @c@ adders, not @n@ beats and an adder tree after them).
Each accepted beat is registered before it is added, so the adders' operands
both come from flip-flops, never from the producer's queue (a LUT-RAM read
into a wide carry chain is one clock cycle's worth of delay on its own on
ECP5). Its protocol is 'collect''s one cycle later at the end: the last beat
accepted in cycle @t@ gives the sum in cycle @t + 2@, and input ready is low
from cycle @t + 1@ until the cycle after the sum moves.
-}
module K2C.Collect
  ( collect
  , collectSum
  ) where

import Clash.Prelude
import Data.Maybe (isJust)

import K2C.Stream (Stream)
import K2C.Window (nextIndex)

-- | Gather @n@ beats into one vector beat (see the module header).
collect
  :: forall dom n c a
   . (HiddenClockResetEnable dom, KnownNat n, KnownNat c, 1 <= n, NFDataX a)
  => SNat n -> Stream dom (Vec c a) (Vec (n * c) a)
collect SNat (input, readyOut) = (output, readyIn)
  where
    count     = register (0 :: Index n) (mux accepted (nextIndex <$> count) count)
    full      = register False (nextFull <$> full <*> completes <*> delivered)
    readyIn   = not <$> full
    accepted  = readyIn .&&. (isJust <$> input)
    completes = accepted .&&. ((== maxBound) <$> count)
    delivered = full .&&. readyOut
    -- No reset: 'full' alone says whether the buffer holds a vector.
    buffer :: Signal dom (Vec n (Vec c a))
    buffer    = delayEn (deepErrorX "collect: no beat yet") accepted
                        ((<<+) <$> buffer <*> (fromJustX <$> input))
    output    = mux full (Just . concat <$> buffer) (pure Nothing)

-- | The elementwise sum of @n@ beats as one beat, with a registered input (see the module
-- header); the caller's @a@ holds every partial sum.
collectSum
  :: forall dom n c a
   . (HiddenClockResetEnable dom, KnownNat n, KnownNat c, 1 <= n, NFDataX a, Num a)
  => SNat n -> Stream dom (Vec c a) (Vec c a)
collectSum SNat (input, readyOut) = (output, readyIn)
  where
    count     = register (0 :: Index n) (mux accepted (nextIndex <$> count) count)
    -- the beat accepted last cycle, whether it starts a sum, and whether it ends one
    pending   = register False accepted
    first     = register False (accepted .&&. ((== 0) <$> count))
    ending    = register False completes
    beat      = register (deepErrorX "collectSum: no beat yet") (fromJustX <$> input)
    full      = register False (nextFull <$> full <*> ending <*> delivered)
    readyIn   = not <$> (full .||. ending)
    accepted  = readyIn .&&. (isJust <$> input)
    completes = accepted .&&. ((== maxBound) <$> count)
    delivered = full .&&. readyOut
    -- No reset: 'full' alone says whether the sum is complete; a first beat replaces it.
    total :: Signal dom (Vec c a)
    total     = delayEn (deepErrorX "collectSum: no beat yet") pending (add <$> first <*> total <*> beat)
    add f acc x = if f then x else zipWith (+) acc x
    output    = mux full (Just <$> total) (pure Nothing)

nextFull :: Bool -> Bool -> Bool -> Bool
nextFull full completes delivered = completes || (full && not delivered)
